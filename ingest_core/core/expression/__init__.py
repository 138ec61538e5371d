"""Druid's expression language, laid out as an interpreter, one direction of use:

  tree        the nodes (Literal, Column, Call, Lambda, ...) and `Expression`
  lexer       text -> tokens, Java escapes
  parser      tokens -> a tree, each call checked as it is read
  checker     a call against its registry entry: name, arity, constant arguments
  checks      the checks of constant arguments that entries name (regexes, periods, zones, ...)
  patterns    the small languages inside constants: regexes, LIKE, Java replacements and formats, JSONPath
  function    a registry entry: `Function`, `Param`, `Example`
  functions/  the registry, one module per section of Druid's math-expr.md
  implicit_apply  which multi-value columns Druid's implicit apply maps, from the entries' array inputs

The evaluator is `ingest_core.executor.expression` (it may use pyarrow; this package imports no I/O library).
"""
