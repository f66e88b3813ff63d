"""The study, in rooms by what changes together: ``records/`` (storage and what each trial stored),
``search/`` (the sampler and its models), ``trials/`` (one trial), ``winner/`` (a stored study read
back, its winner, the tuned YAML) and ``study/`` (the loop); ``settings.py`` holds the run's options."""
