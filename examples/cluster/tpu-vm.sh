#!/bin/bash
# gpt train on a Cloud TPU VM pod slice: the same command on every worker (--worker=all); the
# workers find each other through JAX's TPU detection (the TPU metadata). The run folder must be
# on storage every worker mounts (e.g. a Filestore share at /mnt/shared).
set -euo pipefail
gcloud compute tpus tpu-vm ssh my-v5e-32 --zone=us-west4-a --worker=all --command="\
pip install 'gpt-models' 'jax[tpu]' && \
gpt train --config gpt2-small --name gpt2-small --out /mnt/shared/runs --auto-resume \
--mesh data=-1,fsdp=4 --cluster tpu"
