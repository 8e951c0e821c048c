"""ImageNet-CoG's reports: level results (``results``), the CoG table (``report``), its plots
(``plots``) and their registration (``protocol``)."""
