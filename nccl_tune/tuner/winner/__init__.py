"""What a study found: the stored study read back, its winner, and the tuned YAML it exports and applies."""
