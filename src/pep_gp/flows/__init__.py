"""flows — Prefect flows and deployments, and the ``pep`` command line."""
