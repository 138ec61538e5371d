"""Talking to Kafka from the Airflow side (confluent-kafka): the offset reader (partitions, earliest/latest/
by-time offsets), the consumer-group mirror, client configuration and the secrets it resolves."""
