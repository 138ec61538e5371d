"""Sensors: the data gate ("enough new records yet?"), deferring to `triggers`."""
