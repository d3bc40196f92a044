"""The embedded local stack behind `make run`: dynalite, moto's server, and the API in-process."""
