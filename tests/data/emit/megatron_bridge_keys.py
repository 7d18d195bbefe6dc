"""Writes megatron_bridge_keys.txt: every ConfigContainer override key --emit megatron-bridge may
write, as the dataclasses of Megatron-Bridge 067f987d (and the Megatron-LM 2a75ac12 it pins as
3rdparty/Megatron-LM) define them, read with Python's ast from git mirrors of the two
repositories: model. = GPTModelProvider (TransformerConfig, ModelParallelConfig), train. =
TrainingConfig, ddp. = DistributedDataParallelConfig, optimizer. = OptimizerConfig, dataset. =
GPTDatasetConfig, checkpoint., dist., tokenizer., and ConfigContainer.mixed_precision itself.

Usage: python3 megatron_bridge_keys.py BRIDGE_GIT_DIR MEGATRON_LM_GIT_DIR > megatron_bridge_keys.txt
"""
import ast
import subprocess
import sys

BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
MCORE_COMMIT = "2a75ac12c54ba6a42b34024756820bf819a2e25f"


def source(repos, module):
    """The module's text and whether it is a package's __init__.py."""
    for git_dir, commit, root in repos:
        stem = root + module.replace(".", "/")
        for path in (stem + ".py", stem + "/__init__.py"):
            shown = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                                   capture_output=True, text=True)
            if shown.returncode == 0:
                return shown.stdout, path.endswith("__init__.py")
    raise SystemExit(f"module not found: {module}")


def find_class(repos, module, name):
    text, is_package = source(repos, module)
    imports = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") + ([""] if is_package else [])
                base = ".".join(parts[: -node.level] + ([base] if base else []))
            for alias in node.names:
                imports[alias.asname or alias.name] = (base, alias.name)
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, imports
    if name in imports:
        return find_class(repos, *imports[name])
    raise SystemExit(f"class {name} not in {module}")


def fields(repos, module, name):
    """Annotated class attributes of the class and its dataclass bases (mixins skipped)."""
    node, imports = find_class(repos, module, name)
    names = set()
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        if not isinstance(target, ast.Name) or target.id.endswith("Mixin"):
            continue
        base_module, base_name = imports.get(target.id, (module, target.id))
        names |= fields(repos, base_module, base_name)
    for statement in node.body:
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and not statement.target.id.startswith("_")
                and "ClassVar" not in ast.unparse(statement.annotation)):
            names.add(statement.target.id)
    return names


def main():
    repos = [(sys.argv[1], BRIDGE_COMMIT, "src/"), (sys.argv[2], MCORE_COMMIT, "")]
    config = "megatron.bridge.training.config"
    sections = {
        "model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        "train": (config, "TrainingConfig"),
        "ddp": (config, "DistributedDataParallelConfig"),
        "optimizer": (config, "OptimizerConfig"),
        "dataset": (config, "GPTDatasetConfig"),
        "checkpoint": (config, "CheckpointConfig"),
        "dist": (config, "DistributedInitConfig"),
        "tokenizer": (config, "TokenizerConfig"),
    }
    print("# ConfigContainer override keys of Megatron-Bridge 067f987d (Megatron-LM 2a75ac12),")
    print("# written by megatron_bridge_keys.py (read its docstring); one key per line.")
    for section, (module, name) in sections.items():
        for field in sorted(fields(repos, module, name)):
            print(f"{section}.{field}")
    print("mixed_precision")


if __name__ == "__main__":
    main()
