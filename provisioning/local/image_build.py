"""The process that builds one image of the local backend's store, started by
``ImageStore.ensure`` with the image's lock already taken for it (an open descriptor it
inherits, so the lock is held exactly as long as this process lives).

    python -m provisioning.local.image_build <store root> <definition as JSON>

Its output is the build's log; a failure leaves its reason beside the image, where the
instances waiting for it read it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from contract.images import StoredImage
from provisioning.local.images import ImageBuildError, build_locked, from_definition


def main() -> int:
    root, text = sys.argv[1:3]
    image = from_definition(json.loads(text))
    stored = StoredImage(Path(root), image.digest)
    try:
        build_locked(image, stored, sys.stdout)
    except ImageBuildError as exc:
        stored.failure.write_text(f"{exc}\n")
        print(f"The build of {image.name} failed: {exc}", flush=True)
        return 1
    except Exception as exc:  # whatever ends the build, the instances must hear of it
        stored.failure.write_text(f"the builder failed: {exc!r}\n")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
