"""VTAB-1k's reports: task results (``results``), the VTAB and VTAB+MD tables (``report``),
their plots (``plots``) and their registration (``protocol``)."""
