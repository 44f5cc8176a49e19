"""Access-token signing keys: material, storage, rotation and the keyring's loading."""
