"""The Airflow UI plugin's app: the Datasources page, a tab per DAG, Druid's supervisor REST API."""
