"""The bundled PyTorch reference server: something real to load-test, on CPU or CUDA."""
