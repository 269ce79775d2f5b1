"""scikit-learn-style estimators: the trainer's models on in-memory arrays (``fit``, ``predict``,
``predict_proba``, ``score``, ``log_marginal_likelihood``)."""
