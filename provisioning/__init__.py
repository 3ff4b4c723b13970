"""Provisioning: the backends that start, watch and end a job's instances.

Below the API and the worker, above the runtime: a backend takes the neutral job spec
(``contract.spec``) and reports what it cannot run as values (``contract.problems``),
never in the API's terms. ``registry.build(name, settings)`` is the one way in; each
provider is a package of its own (``local``, ``kubernetes``, ``ec2``) that exports one
record (``plugin.BackendPlugin``) the ``registry`` lists, beside the shared types in
``base``, the instance-type ``catalog`` and the config files every backend writes
(``instance_files``).
"""
