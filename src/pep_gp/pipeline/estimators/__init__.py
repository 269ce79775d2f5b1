"""scikit-learn estimators: one per model of the registry, each generated from its spec
(:class:`~pep_gp.pipeline.estimators.base.GPEstimator`), plus the in-memory training paths that keep one
site per training row (:mod:`pep_gp.pipeline.estimators.untied`)."""
