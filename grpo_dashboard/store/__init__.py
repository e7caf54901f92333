"""The embedded SQLite store: runs, events, metrics in columns, ingestion, display summaries."""
