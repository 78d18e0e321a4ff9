# Sourced by the scripts. The Debian packages every build needs, and ensure_packages PKG...,
# which installs those that are missing.
build_packages=(cmake ninja-build g++ nlohmann-json3-dev doctest-dev libcli11-dev libxxhash-dev python3)

ensure_packages() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
