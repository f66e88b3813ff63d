"""Mirror of SkyRL's ``skyrl`` package path, so that the twin's entry module has SkyRL's module name."""
