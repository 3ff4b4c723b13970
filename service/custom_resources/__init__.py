"""TrainingJob and HyperparameterTuningJob resources (``runyard.dev/v1``): kubectl as a way
in, beside HTTP and the console (docs/kubernetes-resources.md).

Decisions: the database stays the source of truth and resources are one more way in (jobs
submitted over REST or the console are not mirrored); a namespace maps to a project by the
controller's settings (an allow-list); the controller runs as ``runyard controller`` in a
Deployment of its own, its replicas electing one that acts on a Lease (``election``); a
resource's job is named after it and tagged with its uid, so passes are idempotent across
restarts (``controller``); the CRD's schema is generated from the REST request model
(``crd``, ``structural``), and what a schema cannot say is refused by the controller in the
resource's ``Accepted`` condition and a Warning Event, not by a webhook.
"""
