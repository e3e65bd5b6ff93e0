#include "client/ctl/commands/comms_command.hpp"
#include "client/ctl/commands/sessions_command.hpp"
#include "client/ctl/commands/stats_command.hpp"
#include "client/ctl/commands/status_command.hpp"
#include "client/ctl/commands/top_command.hpp"

namespace iris::ctl {

std::vector<std::unique_ptr<Command>> all_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(std::make_unique<StatusCommand>());
  commands.push_back(std::make_unique<StatsCommand>());
  commands.push_back(std::make_unique<SessionsCommand>());
  commands.push_back(std::make_unique<CommsCommand>());
  commands.push_back(std::make_unique<TopCommand>());
  return commands;
}

}  // namespace iris::ctl
