// iris-ctl: the operator's view of irisd. `iris-ctl status|stats|sessions|comms [--json]`.
#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "client/ctl/commands/command.hpp"
#include "client/ctl/operator_attach.hpp"

int main(int argc, char** argv) {
  CLI::App app{"iris-ctl: status and statistics of irisd"};
  std::string socket = "/run/irisd/irisd.sock";
  bool json = false;
  app.add_option("--socket", socket, "irisd control socket")->capture_default_str();
  app.add_flag("--json", json, "print JSON instead of tables");
  app.require_subcommand(1);
  auto commands = iris::ctl::all_commands();
  std::vector<std::pair<CLI::App*, const iris::ctl::Command*>> subcommands;
  for (const auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c->name(), c->description());
    sub->add_flag("--json", json, "print JSON instead of tables");
    subcommands.emplace_back(sub, c.get());
  }
  CLI11_PARSE(app, argc, argv);

  iris::client::ControlChannel channel(socket, std::chrono::seconds(10));
  for (const auto& [sub, command] : subcommands) {
    if (!sub->parsed()) continue;
    try {
      std::optional<iris::ctl::OperatorAttach> identity;
      if (command->needs_identity()) {
        identity.emplace(socket);
        channel.set_token(identity->token());
      }
      const iris::ctl::Report report = command->run(channel);
      if (json) {
        iris::ctl::print_json(report, std::cout);
      } else {
        iris::ctl::print_text(report, std::cout);
      }
    } catch (const iris::Error& e) {
      std::cerr << "iris-ctl " << command->name() << ": " << e.what() << '\n';
      return e.code() == iris::ErrorCode::kUnavailable ? 69 : 1;  // 69: EX_UNAVAILABLE
    }
  }
  return 0;
}
