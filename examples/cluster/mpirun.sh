#!/bin/bash
# gpt train under Open MPI 4.x's mpirun: one process per GPU, found through JAX's Open MPI
# detection (OMPI_MCA_orte_hnp_uri, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK). Open MPI 5 no
# longer sets OMPI_MCA_orte_hnp_uri: there, pass --coordinator, --num-processes and --process-id.
# The run folder must be on a filesystem every host sees.
set -euo pipefail
mpirun -np 16 -H node001:8,node002:8 -x PATH -x XLA_FLAGS \
    gpt train --config gpt2-small --name gpt2-small --out /shared/gpt/runs --auto-resume \
    --mesh data=-1,fsdp=8 --cluster mpi
