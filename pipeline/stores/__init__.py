"""Reading a dataset store and what the jobs over one share: its models and text embeddings
(``store_models``, ``stored_text``), its rows by episode (``store_rows``), frame streams for
training (``frame_stream``), the analysis datasets written beside it (``analysis_dataset``), and
the config bases every store step takes (``questions``). Imports no other group of ``pipeline``."""
