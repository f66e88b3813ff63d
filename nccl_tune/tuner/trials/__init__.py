"""One admitted trial: its spec, how many steps it measures, the early stop, the live view, running it and telling the study."""
