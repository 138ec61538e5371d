"""The installation itself: pyspark and pyspark-client share one folder and must agree."""

from pathlib import Path

import pyspark


def test_pyspark_python_code_matches_its_jars():
    jars = Path(pyspark.__file__).parent / "jars"
    core = sorted(jars.glob("spark-core_*.jar"))
    assert core, f"no Spark jars under {jars}: pyspark-client was installed without pyspark"
    jar_version = core[0].stem.split("-")[-1]
    assert pyspark.__version__ == jar_version, (
        f"pyspark Python code {pyspark.__version__} but jars {jar_version}: pin pyspark and pyspark-client "
        f"to the same version")
