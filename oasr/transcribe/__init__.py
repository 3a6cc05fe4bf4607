"""The offline job behind ``oasr transcribe``: manifests in, engine, stitched outputs out."""
