"""Running one trial: process trees, supervision clocks, memory sampling, teardown."""
