#pragma once
// The exceptions a configuration throws when a rule can only be checked at run time.
#include <stdexcept>

namespace tessera::config {

/// Base of every configuration error; what() names the rule, the values and the fix.
class config_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Too few micro-batches for the pipeline: training needs G >= 2S - 1, inference D >= S.
class pipeline_depth_error : public config_error {
public:
    using config_error::config_error;
};

/// Replicas that do not divide among the instances, or more IPUs than the system has.
class replication_error : public config_error {
public:
    using config_error::config_error;
};

/// A batch that is not a whole number of combined batches, or a dataset too small for one.
class batch_error : public config_error {
public:
    using config_error::config_error;
};

}  // namespace tessera::config
