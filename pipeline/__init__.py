"""pipeline — data stores, the distributed engine, the coordinator and the estimators."""
