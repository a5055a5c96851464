"""The analyses of the runs: in isolated processes or on a Dask cluster, reused from the result cache."""
