"""What every part of Runyard must agree on, in one place at the bottom of the import graph.

The API, the worker, the backends, the runtime on each instance and the libraries training
scripts import all import from here, and this package imports nothing of theirs (nothing
but the standard library, and boto3 for ``s3://`` URIs, imported only when one is used).
The training image carries it beside ``runtime/`` and ``libraries/``.

- ``layout``: an instance's base directory, laid out as SageMaker's ``/opt/ml``
- ``variables``: the ``SM_BASE_DIR`` and ``RUNYARD_*`` variables an instance is started with
- ``spec``: the job as the backends and the instance config see it (not the API's schema)
- ``instance_config``: the config files every backend writes and the runtime reads
- ``modes``: one record per distribution mode
- ``hosts``, ``hyperparameters``, ``phases``, ``limits``, ``problems``: names and sizes
- ``storage``, ``archive``: ``file://`` and ``s3://`` URIs, and tarballs extracted safely
"""
