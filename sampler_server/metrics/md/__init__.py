"""Meta-Dataset's reports: the episode table and ranks (``report``), the robustness plots
(``plots``) and their registration (``protocol``)."""
