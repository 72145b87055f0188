"""replwire on Apache Spark: captured change streams as DataFrames (see the Spark guide in the docs)."""
