"""pep_gp.pipeline — data stores, the distributed engine, the trainer and the estimators.

The public names are re-exported by :mod:`pep_gp`; import them from there.
"""
