"""The job: what a job file may say, reading it, and checking it before any MPI work.

One module per idea, each importable on its own (this package imports none of them, so a
light import such as the algorithm registry stays light):

* :mod:`flegel.job.errors` -- :class:`~flegel.job.errors.JobError`, the one error of a bad job;
* :mod:`flegel.job.algorithms` -- the one registry of built-in algorithms and the loader of a
  job's ``algorithm`` (a built-in name or ``"package.module:Class"``);
* :mod:`flegel.job.sections` -- every key of the top level, ``stop``, ``output`` and
  ``runtime``, the keys of ``sync`` and ``stragglers``, and the typed sections;
* :mod:`flegel.job.yaml_file` -- YAML loading, refusing a key given twice;
* :mod:`flegel.job.overrides` -- ``--set key.path=value``;
* :mod:`flegel.job.job` -- :class:`~flegel.job.job.Job`, the validated job, typed, and its data;
* :mod:`flegel.job.validate` -- :func:`~flegel.job.validate.validate` and
  :func:`~flegel.job.validate.load_job`;
* :mod:`flegel.job.reference` -- the generated ``docs/job-reference.md``
  (``python -m flegel.job.reference > docs/job-reference.md``).
"""
