#!/bin/bash
# The image's entrypoint. Spark on Kubernetes starts each executor pod of the pipeline
# with the single argument `executor` and its settings in SPARK_* variables: run
# Spark's Kubernetes executor backend from pip's PySpark (its jars include
# spark-kubernetes). Anything else is a streamiq command: `node`, `ingest`, `pipeline`...
set -euo pipefail

if [ "${1:-}" != executor ]; then
    exec streamiq "$@"
fi

SPARK_HOME=${SPARK_HOME:-$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
opts=()
for v in "${!SPARK_JAVA_OPT_@}"; do  # SPARK_JAVA_OPT_0, _1, ...: the executor's JVM options
    opts+=("${!v}")
done
exec java "${opts[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
    -cp "$SPARK_HOME/jars/*:$PWD" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "$SPARK_EXECUTOR_POD_NAME"
