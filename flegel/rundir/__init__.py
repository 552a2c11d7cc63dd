"""The run directory: everything that writes or reads it (files, writer, reader, model,
checkpoint, resume)."""
