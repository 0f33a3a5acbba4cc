# Sourced by the scripts: where the project's tools live, and the settings trunk
# needs to work offline (it would otherwise try to download its tools).
export GPUMEM_TOOLS="${GPUMEM_TOOLS:-$HOME/.cache/gpumem-tools}"
case ":$PATH:" in *":$GPUMEM_TOOLS/bin:"*) ;; *) export PATH="$GPUMEM_TOOLS/bin:$PATH" ;; esac
export TRUNK_SKIP_VERSION_CHECK=true
