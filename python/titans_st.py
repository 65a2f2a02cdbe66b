"""Read and write the safetensors files of titans.h with numpy only.

    import titans_st
    f = titans_st.load("out/model.safetensors")      # a model, trainer or memory-state file
    f.kind, f.config["d"], f.tensors["layers.0.attn.wq"].shape   # 'model', 128, (128, 128)
    titans_st.save_model("copy.safetensors", f.tensors, f.config)  # titans_model_load reads it

A file is [8 bytes: header length N, little-endian] [N bytes: JSON header] [tensor data]; the header
maps every tensor name to its dtype, shape and byte range and holds string metadata under
"__metadata__" (docs/checkpoints.md lists the keys: format, version, kind, config, ...).

Command line: python3 titans_st.py FILE [OUT] prints what FILE holds; with OUT it also writes the model
in FILE (a model or trainer file) to OUT.
"""
import json
import struct
import sys

import numpy as np

MAX_HEADER = 100_000_000  # bytes of the JSON header, the limit of titans.h and of Python's safetensors
DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64, "I32": np.int32,
          "I64": np.int64, "U8": np.uint8}


class TitansFile:
    """What a file holds: kind ('model', 'trainer' or 'session'), config (a dict, the model's
    configuration), metadata (every __metadata__ string), tensors (name -> numpy array) and, by kind,
    train_config and step (trainer), tokens_seen (session)."""

    def __init__(self, metadata, tensors):
        self.metadata = metadata
        self.tensors = tensors
        self.kind = metadata.get("kind", "model")
        self.config = json.loads(metadata["config"]) if "config" in metadata else None
        self.train_config = json.loads(metadata["train_config"]) if "train_config" in metadata else None
        self.step = int(metadata["step"]) if "step" in metadata else None
        self.tokens_seen = None
        if "position" in tensors:  # three exact 21-bit pieces of the position
            pieces = [int(v) for v in tensors["position"]]
            self.tokens_seen = pieces[0] | pieces[1] << 21 | pieces[2] << 42

    def model_tensors(self):
        """The parameters alone (a trainer file also holds AdamW's moments, adam.m.* and adam.v.*)."""
        return {k: v for k, v in self.tensors.items() if not k.startswith("adam.")}


def load(path):
    """Reads a safetensors file written by titans.h (or any safetensors file) into a TitansFile."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path} is not a safetensors file ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or n > len(data) - 8:
        raise ValueError(f"{path} is not a safetensors file (header length {n})")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except ValueError:  # not UTF-8, or not JSON
        header = None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is not a JSON object)")
    metadata = header.pop("__metadata__", {})
    base, tensors = 8 + n, {}
    for name, entry in header.items():
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}' has dtype {entry['dtype']}, which this reader does not know")
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"), count=(end - begin) // np.dtype(dtype).itemsize,
                              offset=base + begin)
        tensors[name] = array.reshape(entry["shape"]).astype(dtype)  # a native-order copy
    return TitansFile(metadata, tensors)


def save(path, tensors, metadata):
    """Writes tensors (name -> array, stored as float32) and metadata (key -> str) as a safetensors
    file: tensors in name order, their data back to back, as titans.h writes them."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in sorted(metadata.items())}
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name], dtype="<f4")
        blob = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad the header so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def save_model(path, tensors, config, tokenizer="byte"):
    """Writes a model file that titans_model_load accepts: every parameter under its name (a trainer's
    adam.* tensors are left out) and the configuration (a dict, as TitansFile.config)."""
    params = {k: v for k, v in tensors.items() if not k.startswith("adam.")}
    meta = {"format": "titans.h", "kind": "model", "config": json.dumps(config, separators=(",", ":"))}
    if tokenizer:
        meta["tokenizer"] = tokenizer
    save(path, params, meta)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    try:
        f = load(argv[1])
    except (OSError, ValueError, KeyError, TypeError) as e:  # a file that is not one: one line, not a traceback
        print(f"titans_st.py: error: {e}", file=sys.stderr)
        return 1
    floats = sum(v.size for v in f.model_tensors().values())
    print(f"{argv[1]}: {f.kind}, {len(f.tensors)} tensors, {floats} {'state floats' if f.kind == 'session' else 'parameters'}")
    if f.config:
        print("config:", json.dumps(f.config))
    if f.step is not None:
        print("step:", f.step)
    if f.tokens_seen is not None:
        print("tokens seen:", f.tokens_seen)
    if len(argv) > 2:
        save_model(argv[2], f.tensors, f.config, f.metadata.get("tokenizer"))
        print("wrote", argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
