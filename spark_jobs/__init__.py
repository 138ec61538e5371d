"""Bounded Spark batch jobs over fixed Kafka offset ranges (the spine, part 2)."""
