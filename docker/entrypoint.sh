#!/usr/bin/env bash
# Entrypoint of the kafkalog image: set SPARK_LOCAL_IP to this container's own address, then run
# the command.
#
# Spark drivers run inside the Airflow scheduler's container (client mode) and executors on the
# spark-worker containers, which connect back to the driver. A driver bound to 127.0.0.1 cannot
# be reached; the address the container's hostname resolves to (its address on the compose
# network) can. Code that defaults SPARK_LOCAL_IP to 127.0.0.1 for local runs keeps a value
# set here. An explicit SPARK_LOCAL_IP (compose environment) wins.
set -euo pipefail

if [[ -z "${SPARK_LOCAL_IP:-}" ]]; then
    if address="$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))' 2>/dev/null)" \
            && [[ -n "$address" && "$address" != 127.* ]]; then
        export SPARK_LOCAL_IP="$address"
    fi
fi

exec "$@"
