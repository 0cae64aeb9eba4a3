# expect: work_grows from check_chained_hash(chained_hashes)
patch(
    """        parent = hashlib.sha256(parent + struct.pack(f"<{len(block)}q", *block)).digest()
        hashes.append(parent)""",
    """        parent += struct.pack(f"<{len(block)}q", *block)  # every token so far, one buffer
        hashes.append(hashlib.sha256(parent).digest())""",
)
