"""Code only tests and benchmarks use, kept out of `chalicelib/` so it never ships: the labelled
investigation cases, the fitting of the investigation engine's calibration table, and the NACHA
file writer."""
