"""Apache Kafka as streamiq uses it: the embedded broker (``broker.py``) and its jars,
topic administration, watermark reads, Kafka's partitioner (the same partition as Spark
and every producer), skipped records counted by reason and librdkafka's log lines.
"""
