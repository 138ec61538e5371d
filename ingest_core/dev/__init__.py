"""Developer tooling, never imported by the product: the one-command demo, embedded Apache Kafka / PostgreSQL /
Spark Connect servers for the demo and the tests, and fetching Kafka's jars from Maven Central."""
