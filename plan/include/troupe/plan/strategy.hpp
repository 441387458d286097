#pragma once
// Strategy files (MindSpore's strategy_ckpt_save_file): a chosen placement saved on the first run
// and loaded by later ones to skip planning. JSON: the mesh; a fingerprint of the model and mesh;
// how the gradients travel along dp (gradient compression);
// per parameter its layout (placement per mesh axis, shape, shard shape and each device's offsets);
// the inputs' placements, the pinned values and the outputs' required placements; and per op the
// placement of its outputs, for reading. Loading checks the file against the step and the mesh and
// names the first difference; a damaged file gets an error naming the file and what is wrong.

#include <string>
#include <vector>

#include "troupe/plan/placement.hpp"

namespace troupe::plan {

/// A chosen placement, as a strategy file holds it.
struct Strategy {
  graph::Mesh mesh;
  std::string fingerprint;  // of the step's parameters (names, shapes, dtypes), its ops and the mesh
  /// One parameter's layout.
  struct Layout {
    std::string name;
    Shape shape, shard_shape;            // the whole parameter, and what each device holds
    std::vector<Shape> offsets;          // per device (mesh coordinates in row-major order): where its first
                                         // (or only) block of each dim starts
    graph::NdPlacement placement;
  };
  std::vector<Layout> parameters;        // in the step's order
  std::vector<graph::NdPlacement> inputs;  // in the step's order
  struct Pin {
    graph::NodeId node = -1;
    std::string op;
    int output = 0;
    graph::NdPlacement placement;
  };
  std::vector<Pin> pins;
  std::vector<graph::NdPlacement> outputs;             // required, per graph output
  std::vector<std::vector<graph::NdPlacement>> ops;    // each node's outputs, as planned (for reading)
  std::vector<std::string> op_names;                   // each node's op
  /// How the dp gradient buckets travel ("none", "bf16", "powersgd:R" or "auto", actors::GradCompression):
  /// set by whoever saves the file, applied by whoever loads it.
  std::string grad_compression = "none";
};

/// The fingerprint of `step` on `mesh`: 16 hex digits.
std::string strategy_fingerprint(const graph::TracedFunction& step, const graph::Mesh& mesh);
/// The strategy `request` gave for `step` on `mesh`, planned as `plan`.
Strategy make_strategy(const graph::TracedFunction& step, const graph::Mesh& mesh, const PlacementRequest& request,
                       const graph::GraphPlacement& plan);
/// Writes `s` to `path` as JSON (through a temporary file and a rename).
void save_strategy(const std::string& path, const Strategy& s);
/// Reads a strategy file; throws naming the file and the first thing wrong with it.
Strategy load_strategy(const std::string& path);
/// The placements `s` holds for `step` on `mesh`, which propagate_sharding() turns into the plan it
/// was saved from; throws naming `file` and the first difference when `s` was made for another
/// model or mesh.
PlacementRequest strategy_request(const Strategy& s, const graph::TracedFunction& step, const graph::Mesh& mesh,
                                  const std::string& file);

/// "B", "P", "S(1)" or "S(0)x3" back to a Placement; throws invalid_argument naming `text`.
graph::Placement parse_placement(const std::string& text);

}  // namespace troupe::plan
