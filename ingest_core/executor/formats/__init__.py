"""The value decoders, one per `inputFormat` type (`decoders.decoder_for`): JSON and the text formats, Avro
(`avro`, `avro_columns`), Protobuf (`protobuf_decoder`: a message at a time through `protobuf`, or a chunk in columns through
`protobuf_columns`; `protobuf_descriptors`) and the schema registry client they share (`schema_registry`);
`base` holds what every decoder shares (the flattenSpec's `Flattener`)."""
