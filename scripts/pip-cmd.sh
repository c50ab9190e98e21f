# Sourced (not run) by the scripts that install pinned PyPI wheels into .deps/ (cudnn-frontend.sh,
# onednn.sh): sets the array pip_cmd to pip3 or `python3 -m pip`, left empty when neither exists.
pip_cmd=()
if command -v pip3 >/dev/null 2>&1; then
  pip_cmd=(pip3)
elif python3 -m pip --version >/dev/null 2>&1; then
  pip_cmd=(python3 -m pip)
fi
