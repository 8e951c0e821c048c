"""What the server holds of a run, as keys (the "held" table): for clients that resume."""
