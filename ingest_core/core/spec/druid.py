"""Druid's fixed names and limits that more than one section checks."""

TIME_COLUMN = "__time"  # the row timestamp's column: never a dimension's or a metric's name
INT32_MAX = 2**31 - 1  # Druid's int settings (Integer.MAX_VALUE): the largest value they take
