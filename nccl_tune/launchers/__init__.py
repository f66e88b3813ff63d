"""Running one trial: process trees, supervision clocks, memory sampling, teardown.

- ``base``: the ``Launcher`` interface and ``TrialObserver`` callbacks.
- ``process_tree``: ``ProcessTreeLauncher``, the abstract launcher that owns a trial's run and its one
  supervision loop, and ``ProcessTree``, a running trial as the loop sees it; the hooks its
  siblings provide: ``local``, ``ray_launcher`` and the twin's ``ModelLauncher``.
- ``piped``: ``PipedTree``, a trial whose output this process reads from a pipe (local and Ray),
  and the trial folder both write before the command starts.
- ``local``: ``LocalLauncher``, a trial as a process tree on this machine.
- ``ray_launcher``: ``RayLauncher``, a trial on a whole node of a Ray cluster (``ray_node``: what
  runs on the node).
- ``process``: the trial's environment (marker, overlay) and the spawn in a new session.
- ``logstream``: ``output.log`` written as it arrives and parsed line by line, in bounded memory.
- ``progress``: ``ProgressRules`` applied to lines (phases, steps, memory lines).
- ``supervise``: the start-up deadline, the adaptive stall timeout and the trial budget.
- ``memory``: GPU memory through NVML, trainer memory lines, process-tree RSS.
- ``teardown``: SIGTERM to the group, grace, SIGKILL, then every process carrying the marker.
- ``gate``: the next trial waits for GPU memory back at the baseline and no process left.
- ``fr``: Flight Recorder dump paths and collection.
- ``stacks``: every rank's Python stack (py-spy) when a trial stalls, before teardown.
- ``nccl_check``: ``CheckingLauncher``, a trial's NCCL values tried on the collectives alone before its
  command runs (``nccl_check_worker``: one rank's rounds of collectives); a setting that fails there
  ends the trial in seconds.
- ``trial_files``: a trial folder's ``spec.json``, ``result.json`` and ``facts.json`` (what its verdict,
  from ``diagnose.verdict.decide``, was decided from), written atomically and read back.
"""
