"""The EC2 backend: one instance per host, through boto3."""
