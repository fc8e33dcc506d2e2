"""Pure core: models and decisions. Nothing here does I/O, reads the clock or the environment."""
