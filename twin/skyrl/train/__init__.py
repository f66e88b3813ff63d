"""Mirror of ``skyrl.train`` (today's SkyRL)."""
