"""The synthetic twin of SkyRL text-to-SQL on one 8xH100 node (a test fixture and a demo)."""
