"""Adapters: the only modules that import an SDK (boto3, etcd3, pyiceberg). Importing this imports none."""
