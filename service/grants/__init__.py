"""What each project's jobs may read and write: its own area of the artifact root, and the
places a server administrator granted it (``places``), held at submission, on the
instances and in the credentials a job is given."""
