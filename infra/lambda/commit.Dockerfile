# The commit and replay functions (template.yaml: PackageType Image). They need pyiceberg + pyarrow,
# which do not fit a Lambda zip (~260 MB unzipped against 262 MB; docs/deploy.md). Build context: the
# repository root (see .dockerignore). The pinned set is infra/lambda/image/requirements.txt, compiled
# from pyproject.toml's aws + iceberg extras at the versions the test suite ran (make lambda-requirements).
FROM public.ecr.aws/lambda/python:3.12

COPY infra/lambda/image/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --requirement /tmp/requirements.txt --target "${LAMBDA_TASK_ROOT}" \
    && rm /tmp/requirements.txt

COPY kafscale_iceberg ${LAMBDA_TASK_ROOT}/kafscale_iceberg
COPY functions ${LAMBDA_TASK_ROOT}/functions

# The template sets each function's handler (ImageConfig.Command); this is the commit function's.
CMD ["functions.commit.handler"]
