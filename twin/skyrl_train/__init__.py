"""Mirror of the legacy ``skyrl_train`` package (removed from SkyRL in March 2026)."""
